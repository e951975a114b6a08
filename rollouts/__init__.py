"""Playing rollouts: a run's config made a plan (launch, run_plan), the runner (G rollouts per task, C at a time,
each in its own sandbox, verified and scored), the slot leases several runners share, each rollout's time
budget, interrupts, the run's live terminal view (progress), and `harnessrl tasks check` (checks, check_launch)."""
