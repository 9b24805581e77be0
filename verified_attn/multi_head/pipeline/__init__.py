"""The float multi-head learner as a pipeline of stages (see ``docs/multi_head.md``)."""
