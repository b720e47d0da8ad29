"""Differential fuzzer against PyTorch (not collected by pytest: no test_*.py files here).

``python tests/fuzz/run.py --seconds 900`` runs it; ``tests/test_fuzz_torch.py`` runs a fixed-seed
budget in CI.
"""
