"""Reports of a run: terminal summary, live progress, JSON, self-contained HTML."""
