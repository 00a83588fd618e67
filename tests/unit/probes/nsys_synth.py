"""Build a newer-schema (3.x) Nsight Systems export from the 2022 fixture, for import tests.

Newer exports (2024+, schema 3.x) rename the metadata table to META_DATA_EXPORT, add ENUM_*
tables naming enum values, add `greenContextId` to the activity tables, and have no
NVTX_EVENTS table when the profile had no NVTX ranges. This script makes such a file from the
real 2022 rows, so the importer's schema handling is tested on realistic data:
`python tests/unit/probes/nsys_synth.py OLD.sqlite NEW.sqlite`.

Enum labels differ from CUPTI's fallback names where a test can tell them apart (the
synchronisation rows added here use id 2, labelled as in ENUM_CUPTI_SYNC_TYPE).
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

_GPU_COLS = "start, end, deviceId, contextId, streamId, correlationId, globalPid"


def make_new_schema(old: Path, new: Path, nvtx_type_offset: int | None = None) -> Path:
    """The 3.x-style copy; with `nvtx_type_offset`, keep the NVTX rows but number their event
    types `offset +` the old number and name them in ENUM_NSYS_EVENT_TYPE, so only a reader
    of the ENUM table finds the ranges."""
    new.unlink(missing_ok=True)
    con = sqlite3.connect(new)
    con.execute("ATTACH DATABASE ? AS old", (f"file:{old}?mode=ro",))
    con.executescript(f"""
        CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
        INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.13.2'),
            ('EXPORT_PRODUCT_NAME', 'NVIDIA Nsight Systems'),
            ('EXPORT_PRODUCT_VERSION', '2024.5.1.113');
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO StringIds SELECT id, value FROM old.StringIds;
        CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
        INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (0, 'CUDA_MEMCPY_OPER_UNKNOWN', 'Unknown'),
            (1, 'CUDA_MEMCPY_OPER_HTOD', 'HtoD'), (2, 'CUDA_MEMCPY_OPER_DTOH', 'DtoH'),
            (8, 'CUDA_MEMCPY_OPER_DTOD', 'DtoD');
        CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
        INSERT INTO ENUM_CUDA_MEM_KIND VALUES (0, 'CUDA_MEMOPR_MEMORY_KIND_PAGEABLE', 'Pageable'),
            (1, 'CUDA_MEMOPR_MEMORY_KIND_PINNED', 'Pinned'), (2, 'CUDA_MEMOPR_MEMORY_KIND_DEVICE', 'Device');
        CREATE TABLE ENUM_CUPTI_SYNC_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
        INSERT INTO ENUM_CUPTI_SYNC_TYPE VALUES (1, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE', 'Event Sync'),
            (2, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT', 'Stream Wait Event'),
            (3, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE', 'Stream Sync');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL AS SELECT {_GPU_COLS}, 0 AS greenContextId,
            demangledName, shortName, mangledName, launchType, cacheConfig, registersPerThread,
            gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory,
            localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted, graphNodeId,
            sharedMemoryLimitConfig FROM old.CUPTI_ACTIVITY_KIND_KERNEL;
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY AS SELECT {_GPU_COLS}, 0 AS greenContextId, bytes,
            copyKind, deprecatedSrcId, srcKind, dstKind, srcDeviceId, srcContextId, dstDeviceId,
            dstContextId, migrationCause, graphNodeId, virtualAddress FROM old.CUPTI_ACTIVITY_KIND_MEMCPY;
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME AS SELECT start, end, eventClass, globalTid,
            correlationId, nameId, returnValue, callchainId FROM old.CUPTI_ACTIVITY_KIND_RUNTIME;
        -- one stream-wait per kernel, just before it (a synchronisation table the old file lacks)
        CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION AS SELECT start - 1000 AS start,
            start - 500 AS end, deviceId, contextId, 0 AS greenContextId, streamId,
            correlationId + 100000 AS correlationId, globalPid, 2 AS syncType, 0 AS eventId
            FROM old.CUPTI_ACTIVITY_KIND_KERNEL;
        CREATE TABLE TARGET_INFO_GPU AS SELECT * FROM old.TARGET_INFO_GPU;
        CREATE TABLE TARGET_INFO_SESSION_START_TIME AS SELECT * FROM old.TARGET_INFO_SESSION_START_TIME;
    """)
    if nvtx_type_offset is not None:
        off = int(nvtx_type_offset)
        con.executescript(f"""
            CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
            INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES ({off + 34}, 'NVTX_MARK', 'NvtxMark'),
                ({off + 39}, 'NVTX_THREAD', 'NvtxThread'),
                ({off + 59}, 'NVTX_PUSHPOP_RANGE', 'NvtxPushPopRange'),
                ({off + 60}, 'NVTX_STARTEND_RANGE', 'NvtxStartEndRange'),
                ({off + 75}, 'NVTX_DOMAIN_CREATE', 'NvtxDomainCreate');
            CREATE TABLE NVTX_EVENTS AS SELECT start, end, eventType + {off} AS eventType, rangeId,
                category, color, text, globalTid, endGlobalTid, textId, domainId, uint64Value,
                int64Value, doubleValue, uint32Value, int32Value, floatValue, jsonTextId, jsonText
                FROM old.NVTX_EVENTS;
        """)
    con.commit()
    con.execute("DETACH DATABASE old")
    con.close()
    return new


if __name__ == "__main__":
    make_new_schema(Path(sys.argv[1]), Path(sys.argv[2]))
