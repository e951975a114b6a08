"""Evaluating policies: pass@k of pinned versions on held-out tasks (evaluate: `harnessrl eval`), its
live and final tables (view), and the held-out evaluation a training run takes every few versions
(periodic). The SQL is the store's (store/evaluation.py), the estimator store/passk.py."""
