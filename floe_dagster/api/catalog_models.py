"""Schemas of Floe's table browsing and catalog endpoints (``/api/v1/tables``, ``/api/v1/catalog``);
the HTTP API's other schemas are in api/models.py."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TableSummary(BaseModel):
    catalog: str
    namespace: str = Field(description="Dotted when nested")
    name: str
    qualifiedName: str


class TablesPage(BaseModel):
    catalog: str
    tables: list[TableSummary]
    total: int
    limit: int
    offset: int
    hasMore: bool


class NamespaceTablesPage(TablesPage):
    namespace: str


class NamespacesResponse(BaseModel):
    catalog: str
    namespaces: list[str]
    total: int


class TableDetail(BaseModel):
    """Floe's TableDetailResponse."""

    model_config = ConfigDict(extra="allow")  # as every answer computed by shared code (api/models.py)

    catalog: str
    namespace: str
    name: str
    qualifiedName: str
    location: str | None
    snapshotCount: int
    currentSnapshotId: int | None
    currentSnapshotTimestamp: str | None
    oldestSnapshotTimestamp: str | None
    dataFileCount: int
    totalDataFileSizeBytes: int
    totalDataSizeFormatted: str | None
    averageFileSizeMb: float
    deleteFileCount: int
    positionDeleteFileCount: int | None = Field(description="From the health cache's full tier (null before)")
    equalityDeleteFileCount: int | None = Field(description="From the health cache's full tier (null before)")
    totalRecordCount: int
    manifestCount: int
    totalManifestSizeBytes: int
    formatVersion: int
    partitionSpec: str
    sortOrder: str
    lastModified: str | None


class LatestHealthResponse(BaseModel):
    catalog: str
    reports: list[dict[str, Any]]
    total: int


class CatalogResponse(BaseModel):
    """Floe's CatalogConfigResponse: floe.yaml's catalog section, secrets masked."""

    id: str
    name: str
    type: str
    uri: str | None
    warehouse: str | None
    properties: dict[str, Any]
    createdAt: str | None
    updatedAt: str | None
    active: bool
