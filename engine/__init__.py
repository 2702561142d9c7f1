"""hetflow engine: manifest -> plan -> Dask -> run record."""
