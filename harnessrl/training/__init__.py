"""Training runs around the learner: `quickstart` (everything on one machine, with its plan and live
table), the warm start from demonstrations, `sft`, and what `train` resolves around the learner's config."""
