"""Names a spec may use, per env type; checked without importing any simulator.

Meta-World task order, difficulty groups and natural-language task text follow LeRobot's Meta-World
conventions (the text is data LeRobot policies were conditioned on, so it must stay verbatim);
`tests/test_catalog.py` checks the names against the installed `metaworld` and `libero` packages.
"""

from __future__ import annotations

# task -> (natural-language text, expert policy class in metaworld.policies), in MT50 order
METAWORLD_TASKS: dict[str, tuple[str, str]] = {
    'assembly-v3': ('Pick up a nut and place it onto a peg', 'SawyerAssemblyV3Policy'),
    'basketball-v3': ('Dunk the basketball into the basket', 'SawyerBasketballV3Policy'),
    'bin-picking-v3': ('Grasp the puck from one bin and place it into another bin', 'SawyerBinPickingV3Policy'),
    'box-close-v3': ('Grasp the cover and close the box with it', 'SawyerBoxCloseV3Policy'),
    'button-press-topdown-v3': ('Press a button from the top', 'SawyerButtonPressTopdownV3Policy'),
    'button-press-topdown-wall-v3': ('Bypass a wall and press a button from the top', 'SawyerButtonPressTopdownWallV3Policy'),
    'button-press-v3': ('Press a button', 'SawyerButtonPressV3Policy'),
    'button-press-wall-v3': ('Bypass a wall and press a button', 'SawyerButtonPressWallV3Policy'),
    'coffee-button-v3': ('Push a button on the coffee machine', 'SawyerCoffeeButtonV3Policy'),
    'coffee-pull-v3': ('Pull a mug from a coffee machine', 'SawyerCoffeePullV3Policy'),
    'coffee-push-v3': ('Push a mug under a coffee machine', 'SawyerCoffeePushV3Policy'),
    'dial-turn-v3': ('Rotate a dial 180 degrees', 'SawyerDialTurnV3Policy'),
    'disassemble-v3': ('Pick a nut out of a peg', 'SawyerDisassembleV3Policy'),
    'door-close-v3': ('Close a door with a revolving joint', 'SawyerDoorCloseV3Policy'),
    'door-lock-v3': ('Lock the door by rotating the lock clockwise', 'SawyerDoorLockV3Policy'),
    'door-open-v3': ('Open a door with a revolving joint', 'SawyerDoorOpenV3Policy'),
    'door-unlock-v3': ('Unlock the door by rotating the lock counter-clockwise', 'SawyerDoorUnlockV3Policy'),
    'drawer-close-v3': ('Push and close a drawer', 'SawyerDrawerCloseV3Policy'),
    'drawer-open-v3': ('Open a drawer', 'SawyerDrawerOpenV3Policy'),
    'faucet-close-v3': ('Rotate the faucet clockwise', 'SawyerFaucetCloseV3Policy'),
    'faucet-open-v3': ('Rotate the faucet counter-clockwise', 'SawyerFaucetOpenV3Policy'),
    'hammer-v3': ('Hammer a screw on the wall', 'SawyerHammerV3Policy'),
    'hand-insert-v3': ('Insert the gripper into a hole', 'SawyerHandInsertV3Policy'),
    'handle-press-side-v3': ('Press a handle down sideways', 'SawyerHandlePressSideV3Policy'),
    'handle-press-v3': ('Press a handle down', 'SawyerHandlePressV3Policy'),
    'handle-pull-side-v3': ('Pull a handle up sideways', 'SawyerHandlePullSideV3Policy'),
    'handle-pull-v3': ('Pull a handle up', 'SawyerHandlePullV3Policy'),
    'lever-pull-v3': ('Pull a lever down 90 degrees', 'SawyerLeverPullV3Policy'),
    'peg-insert-side-v3': ('Insert a peg sideways', 'SawyerPegInsertionSideV3Policy'),
    'peg-unplug-side-v3': ('Unplug a peg sideways', 'SawyerPegUnplugSideV3Policy'),
    'pick-out-of-hole-v3': ('Pick up a puck from a hole', 'SawyerPickOutOfHoleV3Policy'),
    'pick-place-v3': ('Pick and place a puck to a goal', 'SawyerPickPlaceV3Policy'),
    'pick-place-wall-v3': ('Pick a puck, bypass a wall and place the puck', 'SawyerPickPlaceWallV3Policy'),
    'plate-slide-back-side-v3': ('Get a plate from the cabinet sideways', 'SawyerPlateSlideBackSideV3Policy'),
    'plate-slide-back-v3': ('Get a plate from the cabinet', 'SawyerPlateSlideBackV3Policy'),
    'plate-slide-side-v3': ('Slide a plate into a cabinet sideways', 'SawyerPlateSlideSideV3Policy'),
    'plate-slide-v3': ('Slide a plate into a cabinet', 'SawyerPlateSlideV3Policy'),
    'push-back-v3': ('Push the puck to a goal', 'SawyerPushBackV3Policy'),
    'push-v3': ('Push the puck to a goal', 'SawyerPushV3Policy'),
    'push-wall-v3': ('Bypass a wall and push a puck to a goal', 'SawyerPushWallV3Policy'),
    'reach-v3': ('Reach a goal position', 'SawyerReachV3Policy'),
    'reach-wall-v3': ('Bypass a wall and reach a goal', 'SawyerReachWallV3Policy'),
    'shelf-place-v3': ('Pick and place a puck onto a shelf', 'SawyerShelfPlaceV3Policy'),
    'soccer-v3': ('Kick a soccer into the goal', 'SawyerSoccerV3Policy'),
    'stick-pull-v3': ('Grasp a stick and pull a box with the stick', 'SawyerStickPullV3Policy'),
    'stick-push-v3': ('Grasp a stick and push a box using the stick', 'SawyerStickPushV3Policy'),
    'sweep-into-v3': ('Sweep a puck into a hole', 'SawyerSweepIntoV3Policy'),
    'sweep-v3': ('Sweep a puck off the table', 'SawyerSweepV3Policy'),
    'window-open-v3': ('Push and open a window', 'SawyerWindowOpenV3Policy'),
    'window-close-v3': ('Push and close a window', 'SawyerWindowCloseV3Policy'),
}

METAWORLD_GROUPS: dict[str, tuple[str, ...]] = {
    'easy': (
        'button-press-v3',
        'button-press-topdown-v3',
        'button-press-topdown-wall-v3',
        'button-press-wall-v3',
        'coffee-button-v3',
        'dial-turn-v3',
        'door-close-v3',
        'door-lock-v3',
        'door-open-v3',
        'door-unlock-v3',
        'drawer-close-v3',
        'drawer-open-v3',
        'faucet-close-v3',
        'faucet-open-v3',
        'handle-press-v3',
        'handle-press-side-v3',
        'handle-pull-v3',
        'handle-pull-side-v3',
        'lever-pull-v3',
        'plate-slide-v3',
        'plate-slide-back-v3',
        'plate-slide-back-side-v3',
        'plate-slide-side-v3',
        'reach-v3',
        'reach-wall-v3',
        'window-close-v3',
        'window-open-v3',
        'peg-unplug-side-v3',
    ),
    'medium': (
        'basketball-v3',
        'bin-picking-v3',
        'box-close-v3',
        'coffee-pull-v3',
        'coffee-push-v3',
        'hammer-v3',
        'peg-insert-side-v3',
        'push-wall-v3',
        'soccer-v3',
        'sweep-v3',
        'sweep-into-v3',
    ),
    'hard': (
        'assembly-v3',
        'hand-insert-v3',
        'pick-out-of-hole-v3',
        'pick-place-v3',
        'push-v3',
        'push-back-v3',
    ),
    'very_hard': (
        'shelf-place-v3',
        'disassemble-v3',
        'stick-pull-v3',
        'stick-push-v3',
        'pick-place-wall-v3',
    ),
    "mt50": tuple(METAWORLD_TASKS),
}

METAWORLD_TASK_PREFIX = "metaworld-"
METAWORLD_CAMERAS = ("corner", "corner2", "corner3", "topview", "behindGripper", "gripperPOV")

# suite -> (number of tasks, max steps per episode as LeRobot sets them)
LIBERO_SUITES: dict[str, tuple[int, int]] = {
    'libero_spatial': (10, 280),
    'libero_object': (10, 280),
    'libero_goal': (10, 300),
    'libero_10': (10, 520),
    'libero_90': (90, 400),
}
LIBERO_CAMERAS = ("agentview_image", "robot0_eye_in_hand_image")

ENV_TYPES = ("metaworld", "libero", "gym")
POLICY_TYPES = ("lerobot", "scripted", "random", "python")
