"""The `leaguezero diplomacy` and `leaguezero llm` command lines (typer apps)."""
