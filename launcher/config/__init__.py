"""Inputs: pod env + recipe + CLI flags -> validated Settings and Recipe."""
