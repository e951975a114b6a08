"""`tito` capture (token in, token out): the gateway renders, splices sampled tokens, parses."""
