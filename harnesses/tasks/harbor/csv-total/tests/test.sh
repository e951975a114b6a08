#!/bin/bash
# Runs in the workspace after the agent; writes the reward for harnessrl.
mkdir -p /logs/verifier
if (
test "$(tr -d ' \n' < total.txt)" = 40
); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
