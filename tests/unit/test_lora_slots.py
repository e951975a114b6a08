"""The managed engine's adapter slots grow with the policies it serves."""

from harnessrl.engine.lora_slots import MIN_SLOTS, lora_slots
from harnessrl.engine.process import EngineLaunch, vllm_command


def test_slots_hold_every_policys_current_and_previous_version_in_a_batch():
    assert lora_slots(1, 2).max_loras == MIN_SLOTS
    assert lora_slots(5, 2).max_loras == 10  # current + one older version of each of 5 policies
    assert lora_slots(5, 2).max_cpu_loras == 17  # max_staleness + 1 versions of each, and two pins


def test_the_engine_command_carries_the_slots(tmp_path):
    slots = lora_slots(3, 1)
    launch = EngineLaunch(model_dir=tmp_path, max_loras=slots.max_loras, max_cpu_loras=slots.max_cpu_loras)
    command = vllm_command(launch)
    assert command[command.index("--max-loras") + 1] == "6"
    assert command[command.index("--max-cpu-loras") + 1] == str(slots.max_cpu_loras)
    assert "--max-cpu-loras" not in vllm_command(EngineLaunch(model_dir=tmp_path))
