"""Submit maintenance runs to the instance's run queue exactly as Dagit does (its GraphQL ``launchRun``
against the loaded code location), for ``floe-dagster backfill`` and the HTTP API's trigger."""

from __future__ import annotations

import asyncio
import os
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, Mapping, Sequence

from dagster import AssetKey, DagsterInstance

from floe_dagster.errors import LaunchFailed

LOCATION_NAME = "floe"
REPOSITORY_NAME = "__repository__"

LAUNCH_RUN = """
mutation($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on Error { message }
  }
}
"""


@dataclass(frozen=True)
class RunToSubmit:
    asset_key: AssetKey
    partition: str
    tags: Mapping[str, str]


@contextmanager
def code_location_context(instance: DagsterInstance) -> Iterator[object]:
    """A Dagit-like request context over this project's code location (loaded in a subprocess)."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import ModuleTarget

    target = ModuleTarget(
        module_name="floe_dagster.definitions", attribute=None, working_directory=os.getcwd(),
        location_name=LOCATION_NAME,
    )
    with WorkspaceProcessContext(instance, target) as process_context:
        context = process_context.create_request_context()
        errors = context.get_code_location_error(LOCATION_NAME)
        if errors:
            raise LaunchFailed(f"the code location failed to load: {errors.message}")
        yield context


async def run_mutation(context, mutation: str, variables: Mapping[str, object], field: str, success: str) -> dict:
    """One GraphQL mutation sent as Dagit sends it: the ``field``'s payload when its type is
    ``success``, else LaunchFailed with Dagster's message."""
    result = await _graphql_schema().execute_async(mutation, context_value=context, variable_values=dict(variables))
    if result.errors:
        raise LaunchFailed("; ".join(str(e) for e in result.errors))
    payload = result.data[field]
    if payload["__typename"] != success:
        raise LaunchFailed(f"{payload['__typename']}: {payload.get('message') or payload}")
    return payload


@lru_cache(maxsize=1)
def _graphql_schema():
    # dagster-graphql is imported (and its schema built, ~1 s) only by commands that launch runs.
    from dagster_graphql.schema import create_schema

    return create_schema()


def submit_runs(instance: DagsterInstance, runs: Sequence[RunToSubmit], job_name: str) -> list[str]:
    async def submit_all(context) -> list[str]:
        # One event loop for every call: the request context's data loaders are bound to it.
        run_ids = []
        for run in runs:
            params = {
                "selector": {
                    "repositoryLocationName": LOCATION_NAME, "repositoryName": REPOSITORY_NAME,
                    "jobName": job_name, "assetSelection": [{"path": list(run.asset_key.path)}],
                    "assetCheckSelection": [],  # the health checks are reported without runs
                },
                "runConfigData": {},
                "executionMetadata": {"tags": [
                    {"key": k, "value": v} for k, v in {**run.tags, "dagster/partition": run.partition}.items()
                ]},
            }
            payload = await run_mutation(context, LAUNCH_RUN, {"executionParams": params}, "launchRun",
                                         "LaunchRunSuccess")
            run_ids.append(payload["run"]["runId"])
        return run_ids

    with code_location_context(instance) as context:
        return asyncio.run(submit_all(context))
