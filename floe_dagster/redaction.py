"""The masking rule (core/basics/secrets.py) applied in a process: every output goes through here.

- :func:`remember` keeps the secrets of the settings this process loaded (settings.py calls it), so
  that a secret is masked wherever it shows up later, even in a shape the rule cannot recognise (an
  error message that quotes a password alone).
- :func:`mask` and :func:`mask_text` mask a value or a text with the rule and those known secrets:
  HTTP answers, error messages, ``/metrics``, the CLI.
- :func:`install_log_masking` masks every log record of the process (floe's loggers, the API
  server's, Dagster's ``context.log``, which become Dagit's run logs) as it is created, before any
  handler or filter sees it. floe-dagster configures no logging of its own otherwise, so this is
  installed where settings are loaded, and by the CLI and ``serve`` at start.
- :func:`masked_output`: the CLI's standard output and error, masked as they are written;
  :func:`print_json` prints a structure as JSON masked as a structure first, then as JSON text (its own
  fields read as fields: a drift entry's ``"key"`` is a property's name, shown).
- :func:`masked_failures` (:func:`mask_exception`): an error leaving a Dagster op, sensor or schedule,
  floe's or a library's (PyIceberg, Py4J, requests…), masked in place with its whole cause chain before
  Dagster renders it into the run's failure and event log (Dagster shows each error's type, message and
  causes). The same objects go on: their types, ``isinstance`` and errors.failure_kind still work.
- :func:`secret_variable`: a secret a Dagster resource needs, handed over as an environment
  variable of this process, so that the resource holds ``EnvVar(name)`` and Dagit shows the name, never
  the value.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, TextIO

from floe_dagster.core.basics.secrets import mask_json as _mask_json
from floe_dagster.core.basics.secrets import mask_text as _mask_text
from floe_dagster.core.basics.secrets import masked, secrets_in

SECRET_VARIABLE_PREFIX = "FLOE_SECRET_"

_known: set[str] = set()
_lock = threading.Lock()
_installed = False


def remember(value: object) -> None:
    """Keep the secrets the rule finds in ``value`` (settings as a mapping, a URI) for later masking,
    and mask log records from now on."""
    found = secrets_in(value)
    with _lock:
        _known.update(found)
    install_log_masking()


def known_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_known)


def mask(value: Any, key: str | None = None) -> Any:
    """A value of any shape with its secrets masked (core.basics.secrets.masked with the known secrets)."""
    return masked(value, known_secrets(), key)


def mask_text(text: str) -> str:
    return _mask_text(text, known_secrets())


def mask_lines(lines: Iterable[str]) -> list[str]:
    known = known_secrets()
    return [_mask_text(line, known) for line in lines]


def _masked_arguments(record: logging.LogRecord) -> tuple | None:
    """The record's ``%`` arguments masked one by one, when that leaves no secret in the message (so
    that formatters that read the arguments, uvicorn's access log, keep them); else None."""
    if not isinstance(record.args, tuple) or not record.args:
        return None
    arguments = tuple(_masked_argument(argument) for argument in record.args)
    try:
        message = str(record.msg) % arguments
    except Exception:  # a %d given a masked text, or the secret was in the format string itself
        return None
    return arguments if mask_text(message) == message else None


def _masked_argument(argument: object) -> object:
    if isinstance(argument, (int, float)) or argument is None:
        return argument
    text = str(argument)
    shown = mask_text(text)
    return argument if shown == text else shown


def _mask_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it when a handler formats the record
        return
    shown = mask_text(message)
    if shown != message:
        arguments = _masked_arguments(record)
        if arguments is not None:
            record.args = arguments
        else:
            record.msg, record.args = shown, None
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        shown = mask_text(text)
        if shown != text:  # handlers print exc_text when it is set, instead of formatting exc_info
            record.exc_text = shown
    if record.stack_info:
        record.stack_info = mask_text(record.stack_info)


def install_log_masking() -> None:
    """Mask every log record of this process from now on (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        original = logging.getLogRecordFactory()

        def masking_factory(*args: object, **kwargs: object) -> logging.LogRecord:
            record = original(*args, **kwargs)
            _mask_record(record)
            return record

        logging.setLogRecordFactory(masking_factory)
        _installed = True


class MaskedStream:
    """A text stream that masks what is written to it (one ``print`` is one write, so a secret is
    never split between two)."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(mask_text(text))
        return len(text)

    @property
    def raw(self) -> TextIO:
        """The stream beneath: only for text already masked (:func:`print_json`)."""
        return self._stream

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding…
        return getattr(self._stream, name)


def print_json(value: Any) -> None:
    """``value`` as indented JSON on standard output, masked by the rule as a structure and then as a JSON
    document (core.basics.secrets.mask_json), past :class:`MaskedStream`'s text rule, which would read each field
    named ``key`` as a secret and hide the property names of a drift."""
    text = _mask_json(json.dumps(mask(value), indent=2, default=str), known_secrets())
    stream = sys.stdout
    (stream.raw if isinstance(stream, MaskedStream) else stream).write(text + "\n")


@contextmanager
def masked_output() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` masked while the block runs (the CLI's commands)."""
    install_log_masking()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = MaskedStream(sys.stdout), MaskedStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


_masked_types: dict[type, type] = {}


def error_chain(exc: BaseException, limit: int = 20) -> list[BaseException]:
    """``exc`` and the errors that caused it, as Python and Dagster show them (``raise ... from``, else the
    error being handled), each once."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain) and len(chain) < limit:
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return chain


def _text_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a Py4J error whose JVM is gone: Dagster falls back to its type, nothing to mask
        return ""


def _masked_type(cls: type) -> type:
    """A subclass of ``cls`` with its name, shown with the masked text kept on each error (``_floe_shown``)."""
    if cls not in _masked_types:
        _masked_types[cls] = type(cls.__name__, (cls,), {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__str__": lambda self: self.__dict__["_floe_shown"],
            # Pickled as the library's own class, with its arguments masked and its attributes (masked in place).
            "__reduce__": lambda self: (cls, tuple(mask_text(a) if isinstance(a, str) else a for a in self.args),
                                        {k: v for k, v in self.__dict__.items() if k != "_floe_shown"}),
        })
    return _masked_types[cls]


def _mask_one(exc: BaseException, shown: str) -> None:
    for name, value in list(getattr(exc, "__dict__", {}).items()):  # e.g. dagster.Failure's description
        if isinstance(value, str):
            setattr(exc, name, mask_text(value))
    try:
        exc.__dict__["_floe_shown"] = shown
        if type(exc) not in _masked_types.values():  # masked before: its new text is enough
            exc.__class__ = _masked_type(type(exc))  # a library's class: its own __str__ may read anything
    except (AttributeError, TypeError):  # a built-in type (ValueError, OSError…): its text is its arguments
        exc.args = tuple(mask_text(a) if isinstance(a, str) else a for a in exc.args)
        if isinstance(exc, OSError):
            for name in ("strerror", "filename", "filename2"):
                if isinstance(getattr(exc, name), str):
                    setattr(exc, name, mask_text(getattr(exc, name)))


def mask_exception(exc: BaseException) -> BaseException:
    """``exc`` with every error of its cause chain masked in place (the same objects, so a caller's
    ``except`` and ``isinstance`` still see the library's types); returns ``exc``."""
    for link in error_chain(exc):
        text = _text_of(link)
        shown = mask_text(text)
        if shown != text:
            _mask_one(link, shown)
    return exc


@contextmanager
def masked_failures() -> Iterator[None]:
    """Around the body of a Dagster op, sensor or schedule: an error leaving it is masked (mask_exception)."""
    try:
        yield
    except Exception as exc:
        mask_exception(exc)
        raise


def failures_masked(function: Callable[..., Iterator]) -> Callable[..., Iterator]:
    """A Dagster op's, sensor's or schedule's generator function, run under :func:`masked_failures`
    (its signature, which Dagster reads for the context and the resources, is the function's)."""

    @functools.wraps(function)
    def masked_function(*args: object, **kwargs: object) -> Iterator:
        with masked_failures():
            yield from function(*args, **kwargs)

    return masked_function


def secret_variable(position: str, scope: str, value: str, preferred: Iterable[str] = ()) -> str:
    """The name of an environment variable of this process that holds ``value``: one of ``preferred``
    (the user's own, e.g. ``FLOE_COORDINATION_URL``) when it holds exactly that, else
    ``FLOE_SECRET_<POSITION>_<8 hex>``, set here. The hex digits come from ``scope`` (the settings'
    source and catalog; never from the value), so that settings of two files in one process do not
    share a variable, and the name is the same every time the same settings are loaded."""
    for name in preferred:
        if os.environ.get(name) == value:
            return name
    digest = hashlib.sha256(scope.encode("utf-8")).hexdigest()[:8].upper()
    name = f"{SECRET_VARIABLE_PREFIX}{position.upper()}_{digest}"
    os.environ[name] = value
    return name
