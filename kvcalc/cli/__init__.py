"""The typer command-line interface: parses, loads, calls the core, renders. No arithmetic here."""
