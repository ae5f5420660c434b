"""The full tier's stored facts from the current snapshot's manifests, each already reduced by
iceberg/metadata_reduction.py's ``summarize_manifest`` (cached by path), added up by
core/facts/manifest_reduction.py: every live file's size, partitions, position and equality delete files apart,
manifest count and bytes, and the inputs of the byte estimates (core/rewrites/estimates.py)."""

from __future__ import annotations


from floe_dagster.core.facts.manifest_reduction import FULL_TIER_FACTS, PartitionSpecs, full_tier_fields
from floe_dagster.core.facts.table_facts import FULL
from floe_dagster.iceberg.fact_reducers import MetadataRead, reduces


@reduces(*FULL_TIER_FACTS, tiers=(FULL,))
def manifests(read: MetadataRead) -> dict[str, object]:
    specs = read.metadata.specs()
    layout = PartitionSpecs(
        field_ids={spec_id: [f.field_id for f in spec.fields] for spec_id, spec in specs.items()},
        current=read.metadata.default_spec_id,
        unpartitioned=frozenset(spec_id for spec_id, spec in specs.items() if spec.is_unpartitioned()),
    )
    reduced = [(manifest.manifest_length, read.summaries[manifest.manifest_path]) for manifest in read.manifests]
    return full_tier_fields(reduced, layout)
