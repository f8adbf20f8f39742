"""runner: declarative, YAML-spec benchmark runner for robot-policy simulation benchmarks."""

__version__ = "0.1.0"
