"""The measured-run pipeline every command that makes runs shares: `infbench run` (one run),
`infbench sweep` (a run per point) and `diagnose memory --test-cap` (a run per cap tested).

`request`: the typed, self-checking request built from options; `record`: preflight to the
stored run; `post_run`: the steps after it; `sweep`: a sweep of such runs.
"""
