"""The profile rules only an `engine: llamacpp` profile meets (its quant, batches, build, RPC workers), and
order.py's RULES: every rule of its profile, these and the generic ones (model/profile_rules/), in the one order
they run in (the registry's `rules` for llama.cpp). Imported only when a profile is validated."""
