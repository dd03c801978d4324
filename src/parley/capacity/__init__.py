"""Capacity planning (``parley capacity``): how many engine replicas, and what users wait.

``kv`` (model dims → KV bytes per token), ``curve`` (a replica's measured throughput
against concurrency), ``queueing`` (Erlang C with the Allen-Cunneen correction, and a small
discrete-event simulation), ``plan`` (the planner: inputs labelled measured or assumed → a
``Plan``), ``report`` (the printed text), ``cli`` (the subcommand). docs/CAPACITY.md explains
the model.
"""
