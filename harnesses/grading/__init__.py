"""How a rollout is scored: where its verifier runs and the grade it gives (grade), the verifier's run itself
(verify), reward functions given as module:function (reward_functions), and the LLM judge (judge) with what it
is asked and how its answer is read (rubric)."""
