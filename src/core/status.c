// Status names and messages, generated from EMBER_STATUS_MAP.
#include "ember/core.h"

const char *ember_status_name(ember_status st) {
    switch (st) {
#define NAME_(name, value, msg) case name: return &#name[value == 0 ? 6 : 10]; // without EMBER_ / EMBER_ERR_
        EMBER_STATUS_MAP(NAME_)
#undef NAME_
    }
    return "UNKNOWN";
}

const char *ember_status_str(ember_status st) {
    switch (st) {
#define STR_(name, value, msg) case name: return msg;
        EMBER_STATUS_MAP(STR_)
#undef STR_
    }
    return "unknown status";
}
