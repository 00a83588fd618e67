"""Typed option groups for the commands: `groups` (how a group declares its options and how a
command takes whole groups), `measured` (the groups of a measured run, which `run` and `sweep`
share, and the run pipeline's requests built from them)."""
