// ember — table-batched embedding bags with fused optimizers, sharded over MPI.
// The umbrella header: include this, or the one header per concept under ember/.
#ifndef EMBER_H
#define EMBER_H

#include "ember/core.h"
#include "ember/dtype.h"
#include "ember/comm.h"
#include "ember/kjt.h"
#include "ember/ebc.h"
#include "ember/shard.h"
#include "ember/plan.h"
#include "ember/state.h"
#include "ember/lfq.h"
#include "ember/rng.h"
#include "ember/dense.h"
#include "ember/quant.h"

#endif
