"""Development tools of the repository (not shipped with the package)."""
