"""The one rule that tells an outage from a table's own failure ("Blast radius" in docs/security.md).

An outage is a service floe-dagster depends on that cannot be reached: the catalog, the table's
storage, Spark (its JVM gateway, its master, a Spark Connect server) or the coordination database.
It is nobody's fault: it does not count toward any table's backoff, and it pauses launches (the
circuit breaker). Everything else that goes wrong while loading or maintaining one table (corrupt or
missing metadata, a permission refused on its files, a table the catalog no longer has, a 4xx answer
of a REST catalog about it, an ``AnalysisException``) is that table's failure: recorded as its
outcome, with backoff, and the other tables go on.

A failure inside one of Spark's jobs (a task, an executor or a shuffle fetch that failed, an executor
out of memory) is the table's too, even when its text is full of connection words: an executor that
dies of memory makes the next stage's fetch fail with "Failed to connect to <executor>", "Connection
refused". Spark, the catalog and the driver all answered; what failed is this table's job. So Spark's
job-internal words win over connection text. Only an error about the client's own connection (a
Python socket error, Py4J's lost gateway, a gateway's 503) is an outage whatever text it carries.
When the storage itself goes down in the middle of a job, that one table is charged one backoff step;
the next table's load, on the driver, meets the outage outside any job and opens the circuit.

Pure: the caller (``errors.error_links``) describes each exception of a cause chain by its class
names, its text (a Java error's text carries its ``Caused by:`` chain), an HTTP status when it
carries one, and whether SQLAlchemy found the connection dropped. The rule reads those alone, so
every layer (PyIceberg reads, Spark's procedures, the coordination database) decides the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from floe_dagster.core.runs.history import OUTAGE

# Exception classes (by name, anywhere in the class's hierarchy) that mean "could not reach it":
# Python's socket errors, requests'/urllib3's connection errors and timeouts, Py4J's lost gateway,
# SQLAlchemy's dropped connection, PyIceberg's 503 answer.
UNREACHABLE_TYPES = frozenset({
    "ConnectionError", "TimeoutError", "gaierror", "herror",  # builtins and socket
    "Timeout", "ConnectTimeout", "ReadTimeout", "NewConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
    "ProtocolError",  # requests / urllib3: "Connection aborted."
    "Py4JNetworkError",  # the Spark JVM gateway is gone
    "DisconnectionError",  # SQLAlchemy
    "ServiceUnavailableError",  # PyIceberg's REST catalog answered 503
})

# Gateways and proxies in front of a catalog answer these when the catalog behind them is down.
UNREACHABLE_STATUSES = frozenset({502, 503, 504})

# What the text of a Java, gRPC, libcurl, psycopg2 or Py4J error says when the other side cannot be
# reached: refused, reset or timed-out connections, unknown hosts, a stopped Spark.
_UNREACHABLE_TEXT = re.compile("|".join((
    r"Connection refused", r"Connection reset", r"Broken pipe", r"Connection timed out", r"connect timed out",
    r"Read timed out", r"SocketTimeoutException", r"ConnectTimeoutException", r"java\.net\.ConnectException",
    r"NoRouteToHostException", r"No route to host", r"Network is unreachable", r"UnknownHostException",
    r"Name or service not known", r"Temporary failure in name resolution", r"nodename nor servname provided",
    r"could not translate host name", r"getaddrinfo failed",
    r"could not connect to server", r"Unable to connect", r"Failed to connect to", r"Couldn't connect to server",
    r"server closed the connection unexpectedly", r"terminating connection due to administrator command",
    r"SSL SYSCALL error", r"timeout expired", r"Communications link failure", r"Failed to get a connection",
    r"NoHttpResponseException", r"failed to respond",
    r"Py4JNetworkError", r"Answer from Java side is empty", r"Error while receiving", r"Error while sending",
    r"SparkContext was shut down", r"Cannot call methods on a stopped SparkContext",
    r"StatusCode\.UNAVAILABLE", r"failed to connect to all addresses",  # Spark Connect (gRPC)
)))

# What Spark says when a failure happened inside one of its jobs (Spark 3.5's texts, Scala and Connect
# alike): a stage or a task that failed, an executor that was lost or killed, a shuffle fetch that
# failed, memory exhausted in a task. None of these names an unreachable service.
_JOB_INTERNAL_TEXT = re.compile("|".join((
    r"Job aborted due to stage failure", r"FetchFailedException", r"FetchFailed\(", r"MetadataFetchFailedException",
    r"Missing an output location for shuffle", r"ExecutorLostFailure", r"Lost executor \d",
    r"Executor heartbeat timed out", r"exited caused by one of the running tasks", r"TaskKilled", r"Lost task \d",
    r"OutOfMemoryError", r"Container killed", r"Task failed while writing rows",
)))

# A commit whose outcome is unknown (the answer was lost, often to a network error) may have landed:
# it is the table's failure, for someone to look at, never an outage that is retried blindly.
_COMMIT_STATE_UNKNOWN = re.compile(r"CommitStateUnknownException|Cannot determine whether the commit was successful")


@dataclass(frozen=True)
class ErrorLink:
    """One exception of a cause chain, as the rule reads it."""

    types: tuple[str, ...]  # the class's name and its bases' names
    text: str
    status: int | None = None  # the HTTP status of the answer it carries, if any
    disconnect: bool = False  # SQLAlchemy saw the database connection dropped (connection_invalidated)


def outage_evidence(links: Iterable[ErrorLink]) -> str | None:
    """Why the error is an outage (a short phrase naming what showed it), or None: the table's own.

    In this order: a commit whose outcome is unknown is the table's; an exception of the client's own
    connection (its class, a gateway's status, a dropped database connection) is an outage; a
    failure inside a Spark job is the table's (:func:`job_internal_evidence`); then connection text."""
    links = list(links)
    if any(_COMMIT_STATE_UNKNOWN.search(link.text) for link in links):
        return None
    for link in links:
        kinds = UNREACHABLE_TYPES.intersection(link.types)
        if kinds:
            return f"{link.types[0]} ({sorted(kinds)[0]})" if link.types[0] not in kinds else link.types[0]
        if link.status in UNREACHABLE_STATUSES:
            return f"HTTP {link.status}"
        if link.disconnect:
            return "the database connection was dropped"
    if job_internal_evidence(links):
        return None
    for link in links:
        match = _UNREACHABLE_TEXT.search(link.text)
        if match:
            return repr(match.group(0))
    return None


def job_internal_evidence(links: Iterable[ErrorLink]) -> str | None:
    """The words that show the error happened inside one of Spark's jobs (``'FetchFailedException'``),
    or None. Such an error is the table's failure, whatever connection text it also carries."""
    for link in links:
        match = _JOB_INTERNAL_TEXT.search(link.text)
        if match:
            return repr(match.group(0))
    return None


@dataclass(frozen=True)
class SparkProcessFacts:
    """What the engine saw of Spark's own process around one table's work that failed as an outage.

    In local mode (floe's default) Spark's JVM is a child of floe's process, and a task of that table's
    job that runs out of memory ends it: the run sees the Py4J gateway gone. That is the table's doing
    only if Spark answered when the table's work began, and only if a fresh Spark then starts and
    answers (:func:`spark_death_kind`); a Spark Connect server is a service, never restarted by a client."""

    local_driver: bool  # floe's own process started Spark's JVM (not a Spark Connect server)
    answered_before: bool  # Spark answered when the table's work began
    answers_after: bool  # Spark still answers after the error (then something else could not be reached)

    @property
    def died_during_the_work(self) -> bool:
        """Spark's own process died during this table's work: start a fresh one to tell whose fault it was."""
        return self.local_driver and self.answered_before and not self.answers_after


def spark_death_kind(facts: SparkProcessFacts, fresh_spark_answered: bool) -> str | None:
    """How the table's outcome is recorded: None (the table's failure, with backoff) when Spark's process
    died during its work and a fresh one answers; an outage otherwise (Spark gone before the work began,
    a Connect server gone, or no Spark that answers)."""
    return None if facts.died_during_the_work and fresh_spark_answered else OUTAGE


def outage_in_text(text: str | None) -> str | None:
    """The rule for an error known only by its text (a Java error's message and cause chain)."""
    return outage_evidence([ErrorLink((), text or "")])


__all__ = ["ErrorLink", "SparkProcessFacts", "UNREACHABLE_STATUSES", "UNREACHABLE_TYPES", "job_internal_evidence",
           "outage_evidence", "outage_in_text", "spark_death_kind"]
