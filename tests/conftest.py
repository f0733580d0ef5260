"""Shared test set-up. Its presence puts tests/ on sys.path (pytest's default import mode),
so every test folder can import the shared helpers beside it: `synergyd_harness` (a real
synergyd process and simulated agents) and `profiles_for_tests`."""
