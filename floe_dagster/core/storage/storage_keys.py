"""The property keys that steer how a table's files are reached: which FileIO class is loaded, which
endpoint, proxy, signer, credentials and client settings it uses. A catalog's properties (floe.yaml,
written by the deployment's owner) and what a REST catalog vends may set them; a table's own properties
(written by whoever owns the table) never may, for floe.

PyIceberg merges a table's properties over the catalog's for that table's FileIO: ``py-io-impl`` names a
class it imports and calls with the catalog's credentials, ``s3.endpoint`` / ``s3.proxy-uri`` /
``s3.signer.uri`` send the requests (and a signer's token) elsewhere. floe builds every table's FileIO
from the catalog's settings alone (iceberg/table_io.py), refuses these keys in a policy's
``tableProperties`` (core/policies/envelope.py) and shows them as ignored when a table sets them
(core/policies/owner_overrides.py). Iceberg Java builds a table's FileIO from the catalog's properties (and a REST
catalog's load-table config), never from table properties; ``io-impl`` is refused all the same, since it
names a class. Pure: no Dagster, Spark or PyIceberg.
"""

from __future__ import annotations

from typing import Mapping

_LOADS_A_CLASS = "names the FileIO class loaded to read and write the table's files, with the catalog's credentials"
STORAGE_KEYS = {
    "py-io-impl": _LOADS_A_CLASS + " (PyIceberg)",
    "io-impl": _LOADS_A_CLASS + " (Iceberg Java)",
    "uri": "names the server a FileIO's request signer sends the catalog's token to (PyIceberg's fsspec FileIO)",
    "token": "is the token a FileIO's request signer sends (PyIceberg's fsspec FileIO)",
}
# The prefixes PyIceberg's FileIOs (io/pyarrow.py, io/fsspec.py) and Iceberg Java's (S3FileIO, GCSFileIO,
# ADLSFileIO, OSSFileIO and their HTTP clients) read their settings under.
STORAGE_PREFIXES = {
    "s3.": "S3", "client.": "the cloud client", "gcs.": "Google Cloud Storage", "adls.": "Azure Data Lake Storage",
    "hdfs.": "HDFS", "oss.": "Alibaba OSS", "hf.": "Hugging Face", "http-client.": "the HTTP client",
    "header.": "the request signer's HTTP headers", "pyarrow.": "PyArrow's file systems",
}


_PREFIXES = tuple(STORAGE_PREFIXES)


def steers_storage(name: str) -> bool:
    """Whether a key steers a table's FileIO (:func:`storage_key_why` is not None), in one lookup and one C call:
    every tick asks for every key of every new table's properties."""
    return name in STORAGE_KEYS or name.startswith(_PREFIXES)


def storage_key_why(name: str) -> str | None:
    """What a key does to a table's FileIO (None: it steers no storage)."""
    if name in STORAGE_KEYS:
        return STORAGE_KEYS[name]
    prefix = next((p for p in STORAGE_PREFIXES if name.startswith(p)), None)
    if prefix is None:
        return None
    return (f"sets how the table's files are reached through {STORAGE_PREFIXES[prefix]} (endpoint, proxy, signer, "
            "credentials, client classes)")


def storage_refusal(name: str) -> str | None:
    """Why a policy may not declare a key that steers a table's FileIO (None: it steers none): always
    refused, no setting allows it (core/policies/envelope.py's property_refusal, core/facts/table_properties.py's
    parser)."""
    why = storage_key_why(name)
    if why is None:
        return None
    return (f"'{name}' is refused by the safety envelope: it {why}. A table's storage is the catalog's to set "
            "(floe.yaml's catalog properties), never a table property's, and no setting allows it")


def storage_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties among ``properties`` that would steer a FileIO, in their order."""
    return {name: value for name, value in properties.items() if storage_key_why(name) is not None}


TABLE_STORAGE_IGNORED = ("a table property never steers floe's storage: floe reads and moves the table's files "
                         "through a FileIO built from the catalog's settings alone (the safety envelope)")

__all__ = ["STORAGE_KEYS", "STORAGE_PREFIXES", "TABLE_STORAGE_IGNORED", "steers_storage", "storage_key_why",
           "storage_properties", "storage_refusal"]
