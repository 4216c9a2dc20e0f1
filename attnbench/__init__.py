"""attnbench: is an attention implementation correct, how fast, how much memory, and how does it scale?"""
