"""The recording stage of the call path: one normalized chat call through the engine (pipeline.py), its
answer streamed through and assembled whole (streaming.py), its tokens linked into the rollout's call
graph and committed, probes of exact capture, trace export."""
