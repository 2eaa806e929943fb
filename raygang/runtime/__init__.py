"""The Ray side: the scheduler actor, member actors, and applying plans."""
