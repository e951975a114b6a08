#!/bin/bash
# Runs in the workspace after the agent; writes the reward for harnessrl.
mkdir -p /logs/verifier
if (
python3 -c 'from mathx import gcd; assert gcd(12, 18) == 6 and gcd(7, 5) == 1'
); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
