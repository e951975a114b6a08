"""harnessrl: train LoRA harness adapters inside off-the-shelf coding agents."""
