"""Process entry points: they wire capabilities together and hold no logic of their own."""
