"""The time-series tables (schema version 2).

* ``fleetd_series``        (metric, labels) ↔ integer id, cached in memory by ``SeriesRegistry``.
* ``fleetd_samples_head``  the newest raw samples: one row per poll (packed series ids and
  values, see ``fleetd.store.headrows``), so a poll's transaction writes a page or two;
  compaction moves them into per-series chunks a few minutes later.
* ``fleetd_sample_chunks`` raw samples of one series over one aligned span, compressed
  (``fleetd.store.codec``): a few bytes a sample, nothing for an unchanged value.
* ``fleetd_rollup_chunks`` 1-minute and 1-hour rollups (``tier`` = 60 or 3600 seconds), one
  compressed ``Summary`` per bucket: count, sum, min, max, first, last, their times, the
  reset-aware increase and the number of changes — so window functions stay exact on them.
* ``fleetd_store_state``   watermarks: how far rollups have got and how far each tier has been
  deleted by retention or the disk budget, which tells queries where each tier is complete.

Timestamps are integer milliseconds. Chunk rows hold ``start_ts`` (the aligned span start,
part of the key) and ``first_ts``/``last_ts`` (the samples actually inside).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from fleetd.store.schema import METADATA

series_table = Table(
    "fleetd_series",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("metric", String(200), nullable=False),
    Column("labels", Text, nullable=False),  # canonical JSON of the sorted label pairs
    UniqueConstraint("metric", "labels", name="uq_fleetd_series_metric_labels"),
)

head_table = Table(
    "fleetd_samples_head",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ts", BigInteger, nullable=False),
    Column("sids", LargeBinary, nullable=False),  # int32 series ids (fleetd.store.headrows)
    Column("vals", LargeBinary, nullable=False),  # float64 values, same order
    Index("ix_fleetd_samples_head_ts", "ts"),
)

chunk_table = Table(
    "fleetd_sample_chunks",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("series_id", Integer, nullable=False),
    Column("start_ts", BigInteger, nullable=False),
    Column("first_ts", BigInteger, nullable=False),
    Column("last_ts", BigInteger, nullable=False),
    Column("count", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    UniqueConstraint("series_id", "start_ts", name="uq_fleetd_sample_chunks_key"),
    Index("ix_fleetd_sample_chunks_last_ts", "last_ts"),
)

rollup_table = Table(
    "fleetd_rollup_chunks",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tier", SmallInteger, nullable=False),  # bucket width in seconds: 60 or 3600
    Column("series_id", Integer, nullable=False),
    Column("start_ts", BigInteger, nullable=False),
    Column("first_ts", BigInteger, nullable=False),  # end of the first bucket inside
    Column("last_ts", BigInteger, nullable=False),  # end of the last bucket inside
    Column("count", Integer, nullable=False),  # samples summarised
    Column("data", LargeBinary, nullable=False),
    UniqueConstraint("tier", "series_id", "start_ts", name="uq_fleetd_rollup_chunks_key"),
    Index("ix_fleetd_rollup_chunks_last_ts", "tier", "last_ts"),
)

state_table = Table(
    "fleetd_store_state",
    METADATA,
    Column("key", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
)
