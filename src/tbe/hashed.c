// Hashed tables (docs/hashed.md): not built yet.
#include "tbe/rowmap.h"

ember_status ember__hashed_create(ember_ebc *ebc, ember__table *tb, ember__rowmap **out) {
    *out = NULL;
    return ember__error(ebc->ctx, EMBER_ERR_UNSUPPORTED, "ember_ebc_create: table '%s': hashed tables", tb->name);
}
