"""Object storage: whether a catalog keeps its tables on S3 (or an S3-compatible server such as MinIO,
Ceph or s3proxy), and the few ``s3.*`` catalog properties both sides must read alike.

The catalog's properties are floe.yaml's ``catalog.properties``, PyIceberg's names. PyIceberg reads
them itself; Spark's Iceberg catalog gets them mapped to S3FileIO's (``spark/catalog_conf.py``). Pure:
a mapping in, a decision out.
"""

from __future__ import annotations

from typing import Mapping

S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# Schemes that both S3FileIO and PyIceberg's PyArrow FileIO read as S3.
S3_SCHEMES = ("s3://", "s3a://", "s3n://")
PATH_STYLE_ACCESS = "s3.path-style-access"  # Iceberg's (Java) name
FORCE_VIRTUAL_ADDRESSING = "s3.force-virtual-addressing"  # PyIceberg's name for the opposite


def uses_s3(properties: Mapping[str, str], spark_properties: Mapping[str, str] | None = None) -> bool:
    """Whether the catalog keeps its tables on S3: an ``s3://`` (``s3a://``) warehouse, ``s3.*``
    properties, or ``S3FileIO`` named in ``spark-properties``. The one place that decides it: Spark's
    FileIO, the AWS bundle among Spark's packages and how orphan cleanup lists files follow from it."""
    return (
        str(properties.get("warehouse") or "").lower().startswith(S3_SCHEMES)
        or any(key.startswith("s3.") for key in properties)
        or (spark_properties or {}).get("io-impl") == S3_FILE_IO
    )


def s3_path_style(properties: Mapping[str, str]) -> bool | None:
    """Path-style bucket addressing (``endpoint/bucket/key``), on which PyIceberg and Spark must agree:
    ``s3.path-style-access`` when set, else the opposite of ``s3.force-virtual-addressing``, else path
    style whenever ``s3.endpoint`` is set, which is PyArrow's own default for a custom endpoint (S3FileIO
    defaults to virtual-host style, ``bucket.endpoint``, which a server at an IP address cannot answer).
    None: neither is set and there is no endpoint (AWS S3 itself): each side's default."""
    for key, path_style_when_true in ((PATH_STYLE_ACCESS, True), (FORCE_VIRTUAL_ADDRESSING, False)):
        value = properties.get(key)
        if value is not None and str(value).strip() != "":
            return _as_bool(value) is path_style_when_true
    return True if properties.get("s3.endpoint") else None


def storage_description(properties: Mapping[str, str]) -> str:
    """Where the catalog's objects are, for messages: the endpoint, or AWS S3 and its region."""
    endpoint = properties.get("s3.endpoint")
    if endpoint:
        return f"object storage at {endpoint} (s3.endpoint)"
    region = properties.get("s3.region") or properties.get("client.region")
    return f"AWS S3 (region {region})" if region else "AWS S3 (no s3.endpoint or s3.region set)"


def _as_bool(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")
