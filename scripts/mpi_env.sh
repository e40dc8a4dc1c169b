# Sourced by the scripts: how Open MPI runs here. Root is allowed (containers, CI); more ranks
# than cores is allowed (small machines); shared memory without the CMA mechanism, which
# containers often forbid; one OpenBLAS thread per rank.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OPENBLAS_NUM_THREADS=1
SHARDRL_MPIRUN_FLAGS=(--oversubscribe)
