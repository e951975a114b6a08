"""The engines behind the gateway and their model folders: vLLM started and watched (process, watchdog),
what the machine offers it (hardware), the model folders it serves (model_prep), a teacher engine in front
of an external model (teacher) or of a task's reference solution (demonstrations), and `harnessrl demo`."""
