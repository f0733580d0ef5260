"""Lyra's capacity loaning (EuroSys'23 §4): which loaned servers to hand back on a reclaim."""
