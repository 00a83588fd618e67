"""Load from several workers: processes on this host (`--workers N`) or Ray actors (`--ray`).

`scale.Scale` says how many and where; `coordinator.Coordinator` plans, starts and collects;
`worker.run_worker` is one worker; `plan` partitions the schedule; `protocol` is what they
say to each other; `clock` aligns their clocks; `record` stores the per-worker rows.
"""
