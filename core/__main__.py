"""`python -m antler`: the same command line as the `antler` console script."""

from antler.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
