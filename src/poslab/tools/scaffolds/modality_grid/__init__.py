"""The grid modality template (``poslab new modality NAME --grid``): the files that differ from the sequence
template in ``scaffolds/modality/`` (data on a 2D grid of cells, read by encoders of ``coords``)."""
