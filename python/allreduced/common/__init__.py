"""Framework-neutral parts of the package: imports neither tensorflow nor torch."""
