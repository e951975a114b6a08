"""`python -m harnessrl.cli`: the same command line as the `harnessrl` script."""

from harnessrl.cli.app import main

main()
