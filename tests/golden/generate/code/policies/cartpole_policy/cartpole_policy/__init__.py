"""A balancing CartPole policy: push towards the side the pole leans to (per-env protocol of runner's python policy)."""

import numpy as np


class Balance:
    def act(self, observation):
        state = np.asarray(observation["agent_pos"])
        return int(state[2] + 0.5 * state[3] > 0)


def make():
    return Balance()
