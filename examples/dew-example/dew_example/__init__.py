"""An example package for dew's bench: one architecture (`tiny_mixer`, in `models`) and one
training step of its own (`steps.make_step`)."""
