"""Evidence captured while an incident lasts (the live watch of `infbench run`)."""
