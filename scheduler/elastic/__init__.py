"""Lyra's elastic scheduling (EuroSys'23 §5): base demand first, flexible demand by MCKP."""
