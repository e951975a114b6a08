#!/bin/bash
# Runs in the workspace after the agent; writes the reward for harnessrl.
mkdir -p /logs/verifier
if (
python3 -c 'from pal import is_palindrome as p; assert p("level") and not p("hello") and p("")'
); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
