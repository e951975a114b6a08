"""The `harnessrl` command line (typer): `app` builds it, one module per command group; commands parse,
then call the module that does the work."""
