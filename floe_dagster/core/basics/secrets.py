"""The one masking rule: what in a setting, a structure or a line of text is a secret, and how it is
shown (``***``). Every output of floe-dagster goes through it: HTTP answers, logs, error messages,
``/metrics``, the CLI and the resources Dagit shows (floe_dagster/redaction.py applies it).

A secret is:

- the **user info of a URI**: the password of ``scheme://user:password@host`` (the user stays, it
  helps to debug and grants nothing alone); a user info without a password is masked whole, since
  ``https://TOKEN@host`` carries a token there;
- the value of a **key naming a secret**: ``header.*`` (REST catalog headers such as
  ``header.Authorization``, also inside Spark's ``spark.sql.catalog.<name>.header.*``), and any key one of whose
  words (split at ``.``, ``-``, ``_`` and camelCase) contains ``password``, ``passwd``, ``passphrase``, ``secret``,
  ``token``, ``credential``, ``authorization``, ``cookie`` or ``signature``, or is ``pwd``, ``sig``, ``key`` or a
  word ending in a kind of key (``accesskey``, ``apikey``, ``privatekey``…; ``access-key`` and ``secretKey`` are
  split into words anyway). Conservative on purpose: ``s3.access-key-id`` (the public half of a credential),
  ``encryption.key-id`` and ``spark.ssl.keyStore`` (a path) are masked too; ``keys-file`` is not (``keys`` names no
  secret), nor a ``key`` right after a word naming what it identifies (``assetKey``, ``partition_key``,
  ``sort-key``, ``dagster/run_key``: an identifier, never a credential). In a structure (a JSON answer, a
  mapping), a field named ``key`` alone names which key (a property's name in a drift entry, an API key's name
  in a 403), never holds one; in text, ``key=…`` stays a secret (``?key=`` carries an API key in a URL),
  but a JSON document made from a structure masked first (:func:`mask_json`: the CLI's ``--json``) keeps
  its own fields' rule;
- the value of a **name/value entry** whose name is a secret key: a mapping whose ``key``, ``property`` or
  ``name`` field names a secret has its ``value``, ``declared`` and ``current`` fields masked (an ignored
  table property ``{property, value, reason}``, a property drift ``{key, declared, current}``);
- in free text (an error message, a log line): the same two, as ``user:password@`` in a URI and as
  ``name=value`` / ``name: value`` / ``"name": "value"`` pairs whose name is a secret key (but for an
  unquoted ``key: …``, ``sig: …`` or ``pwd: …``, which is prose more often than not: "API key: …", also
  inside a name, ``api.key-file: …``, while ``X-API-Key: …`` ends in it; query parameters such as
  ``?password=``, Spark Connect's ``;token=``; a value quoted as ``b'…'`` or, JSON inside a JSON string,
  ``\\"…\\"``), an HTTP ``Bearer``/``Basic``
  credential, and every **known secret** value the caller passes (the secrets of the settings this
  process loaded, at least 8 characters long, so that a short password is not replaced in every
  word that happens to contain it).

Pure: a value in, the masked value out; :func:`secrets_in` lists what the rule would mask, so the
caller can mask those values wherever they show up later.
"""

from __future__ import annotations

import re
from functools import lru_cache
from collections.abc import Mapping
from typing import Any, Callable, Iterable

MASK = "***"
# Known secrets shorter than this are masked only where the rule finds them by position.
MIN_KNOWN_SECRET = 8

_SECRET_PARTS = ("password", "passwd", "passphrase", "secret", "token", "credential", "authorization", "cookie",
                 "signature")
_SECRET_WORDS = frozenset({"pwd", "sig", "key", "accesskey", "secretkey", "privatekey", "apikey", "accountkey",
                           "masterkey", "sharedkey", "signingkey", "clientkey", "sessionkey"})
_PROSE_WORDS = frozenset({"key", "sig", "pwd"})
# Words before ``key`` that make it an identifier (``asset key``, ``partition key``…), not a credential.
_IDENTIFIED = frozenset({"asset", "run", "partition", "sort", "primary", "foreign", "slot", "batch", "group",
                         "item", "policy", "rank", "cache", "row"})
# A structure's name/value entries: the fields naming the entry, and the fields holding its value.
_ENTRY_NAMES = ("key", "property", "name")
_ENTRY_VALUES = frozenset({"value", "declared", "current"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# scheme://userinfo@ : the user info runs to the last '@' before the host ends (a password may hold '@').
_URI_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^\s/?#'\"<>]*)@")
# A word every secret the text rule finds goes with (besides '://' and '='): a text without any is
# left alone at once.
# Searched in the lowered text: ten times faster than an ignore-case search (every string of an answer).
_HINT = re.compile(r"pass|secret|token|credential|authoriz|cookie|signature|key|pwd|sig|header|bearer|basic"
                   r"|digest|negotiate")
_BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic|Digest|Negotiate)(?P<space>\s+)(?P<value>[A-Za-z0-9._~+/=\-]{4,})")
# A name, its separator, and (looked ahead, not consumed: a pair whose name is no secret must not hide
# the pairs inside its value, as in jdbc:postgresql://h/db?password=x) its value.
# Quoted: '…', "…", a bytes value b'…', or \"…\" (JSON quoted inside a JSON string).
_PAIR = re.compile(
    r"(?P<name>\\?\"[A-Za-z0-9_.\-]+\\?\"|'[A-Za-z0-9_.\-]+'|[A-Za-z0-9_.\-]+)(?P<sep>\s*[:=]\s*)"
    r"(?=(?P<value>\\\"(?:(?!\\\").)*\\\"|b?\"(?:[^\"\\]|\\.)*\"|b?'(?:[^'\\]|\\.)*'|[^\s,;&)\]}'\"]+))")
_OPENING_QUOTE = re.compile(r"\\\"|b?[\"']")


@lru_cache(maxsize=8192)  # an answer of thousands of tables asks about the same few field names again and again
def secret_key(name: str, weak_words: bool = True) -> bool:
    """Whether a setting, property or field of this name holds a secret (see the module's rule).
    ``weak_words=False`` leaves out the words that are also prose (``key``, ``sig``, ``pwd``: "API key:
    …"), for a lone word found in free text without quotes before a ``:``."""
    text = str(name)
    lowered = text.lower()
    if lowered.startswith("header.") or ".header." in lowered:
        return True
    previous = ""
    for word in (w.lower() for w in _WORD_SPLIT.split(text) if w):
        if word == "key" and previous in _IDENTIFIED:
            previous = word
            continue
        if (weak_words and word in _SECRET_WORDS) or (word in _SECRET_WORDS and word not in _PROSE_WORDS):
            return True
        if any(part in word for part in _SECRET_PARTS):
            return True
        previous = word
    return False


# The rule as Spark applies it (``spark.redaction.regex``: Spark masks a conf entry whose key or value
# matches, in its logs, UI and event logs), written so that Java and Python read it alike: every word of
# the rule, ``header.`` anywhere in a key, and a value holding a URI's user info. Wider than the rule (any
# ``key``, an identifier's too): a key Spark hides by mistake is only less to read.
SPARK_REDACTION_REGEX = (r"(?i)pass(word|wd|phrase)|secret|token|credential|authoriz|cookie|signature|key|pwd"
                         r"|(^|[^a-z])sig([^a-z]|$)|(^|[.])header[.]|://[^/@\s]*@")


def spark_redaction_regex(user_regex: str | None = None) -> str:
    """``spark.redaction.regex`` for floe's Spark conf: :data:`SPARK_REDACTION_REGEX`, or either of it and
    the user's own (floe.yaml's ``spark.conf``), so that setting one never un-hides a secret floe sets."""
    return SPARK_REDACTION_REGEX if not user_regex else f"{SPARK_REDACTION_REGEX}|(?:{user_regex})"


def secret_field(name: str) -> bool:
    """Whether a field of a structure (a mapping, a JSON object) holds a secret: :func:`secret_key`, but a
    field named ``key`` alone names a key rather than holding one (see the module's rule)."""
    return name not in ("key", "Key", "KEY") and secret_key(name)


def _entry_names_a_secret(value: Mapping) -> bool:
    """Whether a mapping is a name/value entry (``{property, value}``, ``{key, declared, current}``) whose
    name is a secret key."""
    if _ENTRY_VALUES.isdisjoint(value.keys()):  # most mappings: at once
        return False
    return any(isinstance(value.get(name), str) and secret_key(value[name]) for name in _ENTRY_NAMES)


def _masked_userinfo(userinfo: str) -> str:
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{MASK}" if colon and user else MASK


def _scan(text: str, found: Callable[[str], None] | None, known: Iterable[str] = (), fields: bool = False) -> str:
    """The text with every secret the rule finds masked; ``found`` receives each secret value. ``fields``:
    the text is a JSON document, whose ``"name": value`` pairs are a structure's fields (:func:`mask_json`)."""
    if not text:
        return text
    present = {k for k in known if k and len(k) >= MIN_KNOWN_SECRET and k in text}
    if not present and "://" not in text and "=" not in text and not _HINT.search(text.lower()):
        return text  # most texts: no URI, no name=value, no word a secret goes with
    for value in sorted(present, key=len, reverse=True):
        text = text.replace(value, MASK)

    def userinfo(match: re.Match) -> str:
        info = match.group("userinfo")
        if info in ("", MASK) or info.endswith(":" + MASK):
            return match.group(0)
        if found is not None:
            user, colon, password = info.partition(":")
            found(password if colon and user else info)
        return f"{match.group('scheme')}{_masked_userinfo(info)}@"

    def bearer(match: re.Match) -> str:
        if match.group("value") == MASK:
            return match.group(0)
        if found is not None:
            found(match.group("value"))
        return f"{match.group('scheme')}{match.group('space')}{MASK}"

    text = _URI_USERINFO.sub(userinfo, text)
    text = _BEARER.sub(bearer, text)
    return _pairs(text, found, fields)


def _ends_in_prose_word(name: str) -> bool:
    """Whether an unquoted name before a ':' ends in a word that is also prose after another word: ``X-API-Key``,
    ``api_key`` name a key; ``key`` alone ("API key: …") and ``api.key-file`` (a setting's path) do not."""
    words = [word for word in _WORD_SPLIT.split(name) if word]
    return len(words) > 1 and words[-1].lower() in _PROSE_WORDS


def _pairs(text: str, found: Callable[[str], None] | None, fields: bool = False) -> str:
    """``name=value`` and ``name: value`` pairs (quoted or not) whose name is a secret key, masked; with
    ``fields``, a pair ``"name": …`` (double quotes, unescaped: one of the document's own fields) as a
    structure's field (:func:`secret_field`: a field named ``key`` names which key)."""
    parts: list[str] = []
    done = 0  # text before this offset is in parts
    for match in _PAIR.finditer(text):
        name, value = match.group("name"), match.group("value")
        bare = name.strip("'\"\\")
        strong = name != bare or "=" in match.group("sep") or _ends_in_prose_word(bare)
        field = fields and name.startswith('"') and ":" in match.group("sep")
        if match.start() < done or not (secret_field(bare) if field else secret_key(bare, weak_words=strong)):
            continue
        opening = _OPENING_QUOTE.match(value)
        opened = opening.group() if opening else ""
        closed = opened.lstrip("b")
        inner = value[len(opened):len(value) - len(closed)]
        if inner in ("", MASK):
            continue
        if found is not None:
            found(inner)
        parts += [text[done:match.end()], f"{opened}{MASK}{closed}"]
        done = match.end() + len(value)
    return "".join(parts) + text[done:]


def mask_text(text: str, known: Iterable[str] = ()) -> str:
    """Free text (an error message, a log line, a URI) with its secrets masked."""
    return _scan(text, None, known)


def mask_json(text: str, known: Iterable[str] = ()) -> str:
    """A JSON document made of a structure :func:`masked` already masked, masked again as text (known
    secrets, a secret's pair inside a string) but reading its own ``"field": value`` pairs as that
    structure's fields: a drift entry's ``"key": "write.format.default"`` names a property, as it did in
    the structure (plain text would mask any ``key``'s value)."""
    return _scan(text, None, known, fields=True)


def masked(value: Any, known: Iterable[str] = (), key: str | None = None) -> Any:
    """A value of any shape with its secrets masked: a mapping's values under secret keys whole (an
    empty value stays empty, so an unset secret still shows as unset), every string as text, lists,
    tuples and nested mappings all the way down, a name/value entry's value when its name is a secret key.
    ``key`` is the name the value is held under."""
    return _masked(value, tuple(known), key, None)


def _masked(value: object, known: tuple[str, ...], key: str | None, found: Callable[[str], None] | None) -> object:
    """:func:`masked`; ``found`` receives each secret value masked (:func:`secrets_in`)."""
    if key is not None and secret_field(key) and value not in (None, ""):
        return _hidden(value, found)
    if isinstance(value, str):
        return _scan(value, found, known)
    if isinstance(value, Mapping):
        entry = _entry_names_a_secret(value)
        return {k: _hidden(v, found) if entry and k in _ENTRY_VALUES and v not in (None, "")
                else _masked(v, known, str(k), found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_masked(v, known, None, found) for v in value)
    return value


def _hidden(value: object, found: Callable[[str], None] | None) -> str:
    """A secret value of any shape, masked whole; ``found`` receives each of its leaves."""
    if found is not None:
        for leaf in _leaves(value):
            found(str(leaf))
    return MASK


def secrets_in(value: object, key: str | None = None) -> set[str]:
    """Every secret value the rule would mask in ``value`` (a structure as :func:`masked` takes it)."""
    found: set[str] = set()
    _masked(value, (), key, found.add)
    return {secret for secret in found if secret and secret != MASK}


def _leaves(value: object) -> Iterable[object]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    elif value not in (None, ""):
        yield value


def split_secret_entries(conf: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A flat conf (Spark's ``key: value``) as what may be shown (secrets masked) and the entries the
    masking changed, with their real values (to be given separately, e.g. as an environment variable)."""
    shown = {key: masked(value, key=key) for key, value in conf.items()}
    return shown, {key: value for key, value in conf.items() if shown[key] != value}
