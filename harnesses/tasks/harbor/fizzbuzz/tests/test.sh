#!/bin/bash
# Runs in the workspace after the agent; writes the reward for harnessrl.
mkdir -p /logs/verifier
if (
python3 fizzbuzz.py > /tmp/out.txt && python3 - <<'EOF'
expected = ['FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else str(i) for i in range(1, 16)]
import sys
sys.exit(0 if open('/tmp/out.txt').read().split() == expected else 1)
EOF
); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
