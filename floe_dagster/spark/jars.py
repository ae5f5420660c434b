"""Fetch the Iceberg Spark runtime and JDBC drivers from Maven Central once, into a cache folder.

Users get these jars the same way: by Maven coordinates. We prefer the machine's ``mvn`` (it honours
the user's Maven settings and mirrors) and fall back to a plain HTTPS download from Maven Central.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"


class JarResolutionError(RuntimeError):
    pass


def jar_file_name(coordinate: str) -> str:
    group, artifact, version = _split(coordinate)
    return f"{artifact}-{version}.jar"


def _split(coordinate: str) -> tuple[str, str, str]:
    parts = coordinate.strip().split(":")
    if len(parts) != 3 or not all(parts):
        raise JarResolutionError(f"bad Maven coordinate {coordinate!r}: expected group:artifact:version")
    return parts[0], parts[1], parts[2]


def resolve_jars(coordinates: tuple[str, ...] | list[str], cache_dir: str | Path) -> list[Path]:
    """Return local jar paths for the coordinates, downloading the missing ones into ``cache_dir``."""
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    paths = []
    for coordinate in coordinates:
        target = cache / jar_file_name(coordinate)
        if not target.exists():
            _download(coordinate, target)
        paths.append(target)
    return paths


def _download(coordinate: str, target: Path) -> None:
    group, artifact, version = _split(coordinate)
    errors = []
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        if shutil.which("mvn"):
            result = subprocess.run(
                ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={coordinate}", f"-DoutputDirectory={tmp}"],
                capture_output=True, text=True, timeout=900,
            )
            fetched = Path(tmp) / target.name
            if result.returncode == 0 and fetched.exists():
                fetched.replace(target)  # atomic: a half-written jar never appears in the cache
                return
            errors.append(f"mvn dependency:copy failed: {(result.stdout + result.stderr).strip()[-500:]}")
        url = f"{MAVEN_CENTRAL}/{group.replace('.', '/')}/{artifact}/{version}/{target.name}"
        partial = Path(tmp) / (target.name + ".part")
        try:
            with urllib.request.urlopen(url, timeout=300) as response, open(partial, "wb") as out:
                shutil.copyfileobj(response, out)
            partial.replace(target)
            return
        except OSError as exc:
            errors.append(f"download of {url} failed: {exc}")
    raise JarResolutionError(
        f"could not fetch {coordinate} into {target.parent}: " + "; ".join(errors)
        + ". Put the jar there by hand, or list a local path under spark.jars in floe.yaml."
    )
