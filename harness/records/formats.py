"""Versions of the file formats.

``schema_version`` in every result row and in run.json says which format wrote it:

- rows: 1 = rows written before the field existed (the key is absent; reports/ holds them),
  2 = rows that carry it. A version-1 row writes back without the key, as it was. 4 adds
  ``check.per_request[].last_row_rel_l2_err`` (the last-query-row gate) and ``call.untimed_work``
  (MLA prefill); both optional, so versions 1-3 read as they are. 5 adds the cold-L2 probe's
  ``l2_factor``, ``reference_us``, ``coldness`` and ``min_coldness`` (a flush is judged against a
  reference flush of 8x the L2); all optional, so versions 1-4 read as they are. 6 adds the clock
  statistics' ``mean``, the sustained rows' time-stepped ``clocks.window_sm_mhz`` and, under
  ``--keep-raw``, each sample's clock (``clocks.raw_sm_mhz``); all optional, so versions 1-5 read
  as they are. 7 adds ``clocks.below_max_reasons`` (NVML's clock-event reasons over the reads
  below the maximum SM clock); optional, so versions 1-6 read as they are. 8 adds, under
  ``--keep-raw``, the SM clock over each sample's spin hold (``launch.raw_hold_mhz``); optional,
  so versions 1-7 read as they are. 9 adds ``launch.fill_replays`` (a sustained eager row's
  untimed graph replays queued before each sample); optional, so versions 1-8 read as they are.
- run.json: 1 = absent, 2 = carries it, 3 = every key declared (harness/records/header.py; the
  files are the same: versions 1 and 2 read as they are), 4 adds ``models`` (where each model's
  config came from) and ``backend_facts.*.engine_names.*.mla_prefill`` (vLLM's MLA prefill name);
  both optional, so versions 1-3 read as they are.

Readers accept every version a build wrote, migrating it on read, and refuse a newer one (or one
no build wrote, such as 0) with a message saying so, instead of misreading fields they do not
know (harness/records/migrate.py). Any change to a model's fields bumps its version here and
records the schema's fingerprint (tests/records/schema_fingerprints.json). Their JSON Schemas:
harness/records/schema.py."""

from __future__ import annotations

ROW_SCHEMA_VERSION = 9
RUN_SCHEMA_VERSION = 4

