"""Engine start-up logs (vLLM V0/V1, SGLang, the reference engine): the memory phases each
rank printed, in order, and the failure if any, into `startup_logs` / `startup_events`.

`parse_startup_log(text)` reads a log; `import_startup_log(con, path)` stores it. Modules:
`records` (prefixes, ranks, levels), `patterns` (each engine's wording), `parse`, `outcome`
(started or incomplete, and the line recognition stopped at), `importer`.
"""

from probes.startup_log.importer import ImportedLog, import_startup_log, read_log
from probes.startup_log.parse import StartupLog, StartupLogError, parse_startup_log, representative

__all__ = ["ImportedLog", "StartupLog", "StartupLogError", "import_startup_log",
           "parse_startup_log", "read_log", "representative"]
