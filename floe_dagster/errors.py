"""Every error floe-dagster raises, in one hierarchy.

What a caller needs to know is which kind a failure is, not which module raised it:

- :class:`Outage`: something floe-dagster depends on cannot be reached (the catalog, the storage, Spark,
  the coordination database). It is never a table's fault: it does not count toward a table's
  backoff, and it opens the launch circuit. Only network and connection errors are outages, never
  a failure inside a Spark job (a fetch failure, a lost executor, a task out of memory) whatever its
  text: the one rule is :func:`failure_kind` (core/runs/outages.py reads the error), and every layer asks it.
- :class:`LockHeld`: someone else is maintaining the table (or planning). Not a failure of the work.
- :class:`TableFailure`: this table's maintenance failed; it counts toward the table's backoff. So
  does any other error raised inside a table's step that the rule does not call an outage.
- :class:`FailedAfterCommit`: the operation's commit landed, then a read or check after it failed;
  it names the snapshots that landed and counts as the error that followed.
- Bad input (:class:`SettingsError`, :class:`ProcedureOptionError`, and the pure core's
  ``PolicyError``, ``CronError`` and ``EstimateOptionError``, re-exported here): a clear message
  naming the file, field or table; nothing was touched.
- :class:`PolicyStoreError`: a policy request the HTTP API's policy directory refuses.
- :class:`ApiError`: an HTTP answer that is an error (status, code, message, details); the API's
  exception handlers (``api/error_handlers.py``) turn the other kinds into one.

The pure core keeps its own errors (it imports nothing outside itself); they are listed here so this
module is the one place to look.
"""

from __future__ import annotations

from typing import Sequence

from floe_dagster.core.schedules.cron import CronError
from floe_dagster.core.rewrites.rewrite_rules import EstimateOptionError
from floe_dagster.core.runs.history import CONFLICT, LOCK_HELD, OUTAGE
from floe_dagster.core.runs.outages import ErrorLink, outage_evidence
from floe_dagster.core.policies.policy import PolicyError
from floe_dagster.core.basics.tables import TableName
from floe_dagster.redaction import error_chain, mask_text


class FloeError(Exception):
    """Base of floe-dagster's own errors (outside the pure core). Its message is masked as it is made
    (floe_dagster/redaction.py): an error that quotes a setting, a URI or a library's error about them
    never carries a secret into a log, an HTTP answer, the CLI or Dagit's run page."""

    def __init__(self, *args: object):
        super().__init__(*(mask_text(arg) if isinstance(arg, str) else arg for arg in args))


def masked_cause(exc: BaseException) -> BaseException:
    """``exc`` to chain (``raise ... from masked_cause(exc)``): itself when its message shows no secret,
    else a :class:`SecretInCause` with the masked message (the original, which quotes a secret, is
    dropped with its traceback, which Dagster would show on the run's page)."""
    text = str(exc)
    shown = mask_text(text)
    return exc if shown == text else SecretInCause(f"{type(exc).__name__}: {shown}")


class SecretInCause(FloeError):
    """The masked stand-in of an error whose message quoted a secret (see :func:`masked_cause`)."""


# -- outages: not a table's fault ------------------------------------------------------------------


class Outage(FloeError, RuntimeError):
    """A service floe-dagster depends on is down: no table is blamed, launches pause."""


class CatalogUnavailable(Outage):
    """The catalog cannot be reached, or opened or listed at all (no table can be blamed)."""


class EngineUnavailable(Outage):
    """Spark itself could not start or reach the catalog."""


# -- contention: not a failure -----------------------------------------------------------------------


class LockHeld(FloeError, RuntimeError):
    """Someone else holds the lock: not a failure of the work that wanted it."""


class CommitConflict(FloeError, RuntimeError):
    """The operation's commit lost a race with another writer (core/runs/commit_conflicts.py): nothing
    changed, the table is not at fault; retried soon, never counted toward backoff."""


# -- a table's own failures ------------------------------------------------------------------------------


class TableFailure(FloeError, RuntimeError):
    """This table's maintenance failed; it counts toward the table's backoff."""


class UnknownTable(TableFailure, LookupError):
    """The table is not in the catalog; ``table`` names it (the HTTP API answers with its parts)."""

    def __init__(self, message: str, table: TableName | None = None):
        super().__init__(message)
        self.table = table


class TableUnreadable(TableFailure):
    """The catalog answered, but this table could not be loaded or read: corrupt or missing metadata,
    a permission refused on its files, an error answer about it. Its failure alone, with backoff."""


class MaintenanceFailed(TableFailure):
    """The procedure ran and failed, or its result failed a safety check."""


class EnvelopeViolation(MaintenanceFailed):
    """A run would reach outside its table (a location outside the table's, a refused table property):
    refused in the run's first step, before any engine call (core/policies/envelope.py)."""


class SparkProcessDied(MaintenanceFailed):
    """Spark's own process (a local driver's JVM) died during this table's work, and a fresh one started
    and answered: the table's failure, with backoff; the run goes on with the fresh Spark
    (spark/driver_restart.py)."""


class RowCountMismatch(MaintenanceFailed):
    """A rewrite committed a snapshot whose rows differ from its parent's. ``snapshot_id`` is that
    snapshot; ``ours`` every snapshot the run committed (what a rollback may take back). The run rolls
    the table back when only its own snapshots lie on top (defs/assets.py, iceberg/rollback.py)."""

    def __init__(self, message: str, snapshot_id: int | None = None, ours: Sequence[int] = (),
                 rolled_back: bool = False, current_snapshot_id: int | None = None):
        super().__init__(message)
        self.snapshot_id, self.ours = snapshot_id, tuple(ours)
        # After the caller's rollback attempt: whether it rolled back, and the table's current snapshot.
        self.rolled_back, self.current_snapshot_id = rolled_back, current_snapshot_id


class FailedAfterCommit(FloeError, RuntimeError):
    """The operation's changes landed (``snapshot_ids``: the snapshots it committed, empty when they
    could not be read), then a read or check after the commit failed with ``after``. It counts as
    ``after`` does: an outage when that is one, else the table's failure."""

    def __init__(self, message: str, snapshot_ids: Sequence[int], after: BaseException):
        super().__init__(message)
        self.snapshot_ids, self.after = tuple(snapshot_ids), after

    @classmethod
    def of(cls, what: str, snapshot_ids: Sequence[int], stage: str, after: BaseException,
           detail: str | None = None) -> "FailedAfterCommit":
        """``what`` ("REWRITE_DATA_FILES on 'cat.ns.t'") landed ``snapshot_ids``, then ``stage`` failed with
        ``after`` (``detail``: its message as the caller knows it best, e.g. a Java error's own line)."""
        landed = (f"committed snapshot(s) {', '.join(map(str, snapshot_ids))}" if snapshot_ids
                  else "finished (its changes landed; the snapshots it committed could not be read)")
        detail = detail or (str(after) if isinstance(after, FloeError) else f"{type(after).__name__}: {after}")
        return cls(f"{what} {landed}; then {stage} failed: {detail}", snapshot_ids, after)

    @property
    def snapshot_id(self) -> int | None:
        """The newest snapshot the operation committed."""
        return self.snapshot_ids[-1] if self.snapshot_ids else None


class HealthError(TableFailure):
    """A table's metadata could not be read or reduced (neither an unknown table nor an outage)."""


# -- bad input -------------------------------------------------------------------------------------------


class SettingsError(FloeError, ValueError):
    """A bad settings file or override; the message names the file, the key and what is allowed.
    ``errors`` holds every problem found, one line each (the message is those lines)."""

    def __init__(self, *errors: str):
        self.errors = [mask_text(error) for error in errors]
        super().__init__("\n".join(self.errors))


class KeysError(SettingsError):
    """The HTTP API's keys cannot be read; the message names the file or variable and the line."""


class BindRefused(FloeError, ValueError):
    """``serve`` without keys on an address other than loopback."""


class LastAdminKey(FloeError, ValueError):
    """A change to the API keys that would leave no enabled, unexpired ADMIN key; nothing changed."""


class TriggerRefused(FloeError, ValueError):
    """A manual trigger that cannot run as asked (no policy, an operation not configured, a table that
    is no asset); ``code`` is the HTTP API's error code, ``details`` its details."""

    def __init__(self, code: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.details = code, details or {}


class ProcedureOptionError(FloeError, ValueError):
    """An operation option the procedure cannot take; raised before Spark starts."""


# -- launching and set-up ------------------------------------------------------------------------------------


class LaunchFailed(FloeError, RuntimeError):
    """Runs could not be queued on the instance."""


class JarResolutionError(FloeError, RuntimeError):
    """A Spark jar could not be fetched into the cache."""


# -- the HTTP API's policy directory ----------------------------------------------------------------------

POLICY_REQUEST_BODY = "body"  # the parser's source label for a request body


class PolicyStoreError(FloeError):
    """A policy request the store refuses; nothing was written."""


class PolicyNotFound(PolicyStoreError, LookupError):
    def __init__(self, key: str):
        super().__init__(f"Policy not found: {key}")
        self.key = key


class PolicyConflict(PolicyStoreError):
    """A name another policy has, or a file that is in the way."""


class PolicyNotManaged(PolicyStoreError):
    """The policy comes from a file the API does not write."""

    def __init__(self, message: str, source: str):
        super().__init__(message)
        self.source = source


class PolicyWritesDisabled(PolicyStoreError):
    """No ``api.policy-directory``: the API only reads policies."""


class PolicyStoreBusy(PolicyStoreError, LockHeld):
    """Another writer held the directory's lock for too long."""


class InvalidPolicyRequest(PolicyStoreError, ValueError):
    """A body the parser (or a file-name rule) refuses; ``problems`` are (field path, message)."""

    def __init__(self, problems: list[tuple[str, str]], message: str | None = None):
        self.problems = problems
        super().__init__(message or "; ".join(f"{POLICY_REQUEST_BODY}.{field}: {text}" if field else text
                                              for field, text in problems))


# -- the HTTP API's answer -----------------------------------------------------------------------------------


class ApiError(FloeError):
    """An error as the HTTP API answers it: Floe's status code, a machine-readable code, the message
    and details (the body ``{error, code, details, timestamp}``)."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, object] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, self.args[0], details or {}


def failure_kind(exc: BaseException) -> str | None:
    """How a failed table's outcome is recorded (the one rule): ``lock_held`` and ``outage`` never
    count toward a table's backoff (core.runs.history folds them away), ``conflict`` is a lost race; None
    is the table's own failure. floe-dagster's own errors were classified where they were raised (by
    this rule); any other error is an outage only when it shows that a service could not be reached."""
    if isinstance(exc, FailedAfterCommit):
        return failure_kind(exc.after)
    if isinstance(exc, LockHeld):
        return LOCK_HELD
    if isinstance(exc, CommitConflict):
        return CONFLICT
    if isinstance(exc, Outage):
        return OUTAGE
    if isinstance(exc, FloeError):
        return None
    return OUTAGE if unreachable(exc) else None


def unreachable(exc: BaseException, extra_text: str = "") -> str | None:
    """What shows that ``exc`` (or an error in its cause chain) is a service that cannot be reached,
    or None; ``extra_text``: more of the error's text the caller has (a Java error's cause chain)."""
    links = error_links(exc)
    if extra_text:
        links.append(ErrorLink((), extra_text))
    return outage_evidence(links)


def error_links(exc: BaseException, limit: int = 20) -> list[ErrorLink]:
    """The exception and its causes (``raise ... from``, or the error being handled), as the rule reads them."""
    links: list[ErrorLink] = []
    for current in error_chain(exc, limit):
        status = getattr(getattr(current, "response", None), "status_code", None)
        links.append(ErrorLink(
            tuple(cls.__name__ for cls in type(current).__mro__), _text_of(current),
            status if isinstance(status, int) else None, getattr(current, "connection_invalidated", False) is True,
        ))
    return links


def _text_of(exc: BaseException) -> str:
    """An error's text; a Spark error's own rendering may need the JVM, which may be gone."""
    try:
        text = str(exc)
    except Exception:
        text = str(getattr(exc, "desc", None) or getattr(exc, "errmsg", None) or type(exc).__name__)
    trace = getattr(exc, "stackTrace", None)  # PySpark's captured errors keep the Java cause chain here
    return f"{text}\n{trace}" if isinstance(trace, str) and trace not in text else text


__all__ = [
    "FloeError", "Outage", "CatalogUnavailable", "EngineUnavailable", "LockHeld", "CommitConflict", "TableFailure",
    "UnknownTable",
    "TableUnreadable", "MaintenanceFailed", "EnvelopeViolation", "RowCountMismatch", "FailedAfterCommit", "HealthError",
    "SparkProcessDied",
    "SettingsError", "KeysError", "BindRefused", "LastAdminKey",
    "ProcedureOptionError", "TriggerRefused", "LaunchFailed", "JarResolutionError", "PolicyError", "CronError",
    "EstimateOptionError",
    "PolicyStoreError", "PolicyNotFound", "PolicyConflict", "PolicyNotManaged", "PolicyWritesDisabled",
    "PolicyStoreBusy",
    "InvalidPolicyRequest", "ApiError", "SecretInCause", "masked_cause", "failure_kind", "unreachable", "error_links",
    "LOCK_HELD", "OUTAGE", "CONFLICT",
]
